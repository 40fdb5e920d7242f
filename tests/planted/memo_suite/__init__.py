"""A suite in a package of its own, one kernel per module and a helper both use, for the
build memo's tests (tests/test_build_memo.py): an edit to one kernel's module rebuilds that
kernel only, an edit to the helper both."""
