"""The pushdown algebra: boxes, their AND/OR, and the selection holding their union."""

from fractions import Fraction

from gtsamples.integrations import pushdown as P


def test_series_from_table_and_tsid_sets():
    boxes = P.conj(P.id_constraint("__table_id", "in", [1, 2]), P.id_constraint("__tsid", "==", 5))
    assert P.selection_args(boxes) == {"series": [(1, 5), (2, 5)]}


def test_tables_only_when_a_box_lacks_tsids():
    a = P.conj(P.id_constraint("__table_id", "==", 1), P.id_constraint("__tsid", "==", 5))
    b = P.id_constraint("__table_id", "==", 3)
    assert P.selection_args(P.disj(a, b)) == {"tables": [1, 3]}


def test_any_unconstrained_box_drops_the_id_selection():
    a = P.id_constraint("__table_id", "==", 1)
    assert P.selection_args(P.disj(a, P.ALL)) == {}
    assert P.selection_args(P.conj(a, P.ALL)) == {"tables": [1]}


def test_small_ranges_become_sets_large_ones_do_not():
    assert P.selection_args(P.id_constraint("__table_id", "between", (2, 4))) == {"tables": [2, 3, 4]}
    assert P.selection_args(P.id_constraint("__table_id", ">=", 2)) == {}
    assert P.selection_args(P.conj(P.id_constraint("__table_id", ">=", 2),
                                   P.id_constraint("__table_id", "<", 4))) == {"tables": [2, 3]}


def test_contradiction_is_an_empty_selection():
    boxes = P.conj(P.id_constraint("__table_id", "==", 1), P.id_constraint("__table_id", "==", 2))
    assert P.selection_args(boxes) == {"tables": []}
    assert P.selection_args(P.conj(P.time_constraint(">=", 10), P.time_constraint("<", 10))) == {"tables": []}


def test_time_hull_and_exact_bounds():
    boxes = P.disj(P.conj(P.time_constraint(">=", 10), P.time_constraint("<", 20)),
                   P.conj(P.time_constraint(">", 30), P.time_constraint("<=", 40)))
    assert P.selection_args(boxes) == {"start": 10, "end": 41}
    assert P.selection_args(P.time_constraint("==", 7)) == {"start": 7, "end": 8}
    assert P.selection_args(P.disj(P.time_constraint(">=", 10), P.time_constraint("<", 5))) == {}


def test_fractional_time_literals_widen():
    # 10.5 units: whichever way an engine rounds it, the rows it keeps are inside
    assert P.selection_args(P.time_constraint(">=", Fraction(21, 2))) == {"start": 10}
    assert P.selection_args(P.time_constraint("<", Fraction(21, 2))) == {"end": 12}
    assert P.selection_args(P.time_constraint("==", Fraction(21, 2))) == {"start": 10, "end": 12}


def test_too_many_boxes_merge_into_their_hull():
    boxes = ()
    for k in range(P.MAX_BOXES + 10):
        boxes = P.disj(boxes, P.conj(P.id_constraint("__table_id", "==", 1), P.id_constraint("__tsid", "==", k)))
    assert len(boxes) <= P.MAX_BOXES
    assert P.selection_args(boxes) == {"series": [(1, k) for k in range(P.MAX_BOXES + 10)]}


def test_out_of_range_values_are_dropped():
    assert P.selection_args(P.id_constraint("__table_id", "in", [-1, 1 << 32, 5])) == {"tables": [5]}
    assert P.selection_args(P.time_constraint(">=", 1 << 70)) == {"tables": []}
    assert P.selection_args(P.time_constraint("<", 1 << 70)) == {}
    assert P.id_constraint("cpu_usage", "==", 1) == P.ALL
    assert P.id_constraint("__tsid", "==", 1.5) == P.ALL
