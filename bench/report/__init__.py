"""Reports: pure functions from a results DataFrame to tables and figures; writers at the edge."""
