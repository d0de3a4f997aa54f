"""Support code for the test suite (helpers, servers, fault injection); no tests here."""
