"""pytest plugin (entry point ``pytest11: alkstore``): fixtures for users' test suites."""
