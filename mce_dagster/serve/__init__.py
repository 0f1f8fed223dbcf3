"""The network interfaces agents and other programs reach the results through: the
MCP server (`mcp_server`, four tools) and the REST API (`api`, the `[api]` extra),
both behind `guard`.

The interfaces call `mce_dagster.service` (the registry queries and the check of an
answer's numbers are in `mce_dagster.results`); nothing here runs Cypher of a
caller's: every identifier comes from the catalog and the ontology, every value is a
parameter.
"""
