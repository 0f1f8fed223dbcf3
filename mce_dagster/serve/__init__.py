"""What agents and other programs reach the results through: the registry queries
(`query`), the check of an answer's numbers (`verify`), and two interfaces over them,
the MCP server (`mcp_server`, four tools) and the REST API (`api`, the `[api]` extra).

The interfaces call `mce_dagster.service`; nothing here runs Cypher of a caller's:
every identifier comes from the catalog and the ontology, every value is a parameter.
"""
