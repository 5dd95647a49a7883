"""Finding signatures (``tests.fuzz.run.signature``) of bugs that are reported and still open.

The fuzz smoke test tolerates these (they are recorded under tests/data/bad/ with
strict-xfail tests); any other finding fails it.  Remove an entry when its bug is
fixed -- the strict xfail in tests/test_bad_files.py will say so.
"""

KNOWN_OPEN = {
}
