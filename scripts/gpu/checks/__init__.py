"""The GPU check's checks, one module each; driver.py groups them into parts. Each check runs
its programs through runner.Context and adds rows (PASS, FAIL, and the statuses report.py
lists) with the figures they rest on."""
