"""Benchmarks of rlwatch against its peers (grep, ripgrep, glances, nvitop), run by ``python -m bench``.

They are their own command, never part of the test suite: timings on a shared machine are evidence to read, not
assertions to fail on. Every section measures its peer in the same run and reports medians and ratios.
"""
