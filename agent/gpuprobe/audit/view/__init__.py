"""The cluster view: what the API server says about this cluster's GPUs, beside the agents.

`kinds` names every resource it reads (the auditor's ClusterRole grants exactly those);
`read` gathers the digested facts within the audit's deadline (`nodes`, `pending`, `gangs`,
`stack`, `storage` digest the objects page by page); `judge` and its helpers (`checklist`,
`scheduling`) turn facts and the agents' reports into the checklist and the findings;
`model` is the `cluster` object `audit --json` writes.
"""
