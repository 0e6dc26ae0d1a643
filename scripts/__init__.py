"""The kit's maintenance scripts. Run them as files (`python scripts/make_notebooks.py`); this file makes them a
package so the tests import them by name (`from scripts import make_notebooks`) rather than by path."""
