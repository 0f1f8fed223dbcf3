from mce_dagster.client import MCEClient

with MCEClient() as client:
    new = [s["session_id"] for s in client.list_sessions(evaluated=False)][:3]
    client.compute_and_store(new, metrics=["Duration", "ToolErrorRate"])  # one Dagster run
    results = client.get_metrics(new[0], metric_ids=["Duration"], recursive=True)
    print(f"{new[0]}: {len(results)} Duration results (the session's and its calls')")
    frame = client.results_frame(metrics=["Session/Duration"], sessions=new)
    print(frame[["session_id", "value"]].to_string(index=False))
