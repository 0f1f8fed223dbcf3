"""The Dagster side: partitions, resources, IO managers, assets and jobs."""
