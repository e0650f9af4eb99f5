"""What every benchmark shares: load generators and request records, prompts and traces,
the simulated fleet and stub backend as processes, endpoint readers, figures and reports."""
