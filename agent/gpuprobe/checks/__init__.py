"""The checks: one module per check, each a pure function of the host and the config.

A check reads only through `Host`, returns a `CheckResult`, never prints and never exits.
Each module ends with its record (`record.Check`); `registry` lists the records in report
order; `runner` runs them under deadlines.
"""
