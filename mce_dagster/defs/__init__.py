"""The Dagster side: partitions, resources, IO managers, assets and jobs."""

import warnings

import dagster as dg

# Single-run backfills (BackfillPolicy) are what let one run evaluate a batch of
# sessions; Dagster still marks the parameter as beta.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
