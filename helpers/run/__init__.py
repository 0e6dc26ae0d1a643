"""The run pipeline's parts that helpers.train (the named steps) attaches to TRL's trainer: metrics.jsonl, the live
dashboard, checkpoints and resume, several processes. Importing this package imports none of them."""
