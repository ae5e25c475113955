"""Integrations: the pytest plugin for users' test suites."""
