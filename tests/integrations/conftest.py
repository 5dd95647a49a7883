import pytest

import gtsamples as gs
from gtsamples.demo import synthetic_metrics

FILE_ID = "5a3c0000-0000-4000-8000-000000000001"


@pytest.fixture(scope="module")
def art_dir(tmp_path_factory):
    """A small artifact (30 series of 400 rows, 3 tables) written to a store: (root, entry)."""
    root = tmp_path_factory.mktemp("store")
    table = synthetic_metrics(n_series=30, rows_per_series=400, seed=7)
    entry = gs.write_artifact(table, str(root), region_id=4398046511104, source_file_id=FILE_ID,
                              timestamp_column_id=0, field_column_ids=[1, 2, 3, 4], row_limit=128)
    return str(root), entry


@pytest.fixture(scope="module")
def art(art_dir):
    root, entry = art_dir
    return gs.open_artifact(root, entry=entry)


@pytest.fixture(scope="module")
def region(tmp_path_factory):
    """A region of two SSTs, the first covered by an artifact, the second scanned."""
    root = tmp_path_factory.mktemp("region")
    reg = gs.create_region(str(root), 4398046511111)
    reg.add_sst(synthetic_metrics(n_series=12, rows_per_series=300, seed=1))
    reg.build()
    reg.add_sst(synthetic_metrics(n_series=8, rows_per_series=200, seed=2))
    return reg
