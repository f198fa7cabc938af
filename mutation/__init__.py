"""Mutation testing of minigrad's rules: the groups, the justified equivalent mutants, the page.

`scripts/mutants.py` (`make mutants`) runs mutmut; this package holds what it and the tests
share. See docs/mutation.md.
"""
