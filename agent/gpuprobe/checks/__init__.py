"""The checks: one module per check, each a pure function of the host and the config.

A check reads only through `Host`, returns a `CheckResult`, never prints and never exits.
`registry.CHECKS` lists them in report order; `runner` runs them under deadlines.
"""
