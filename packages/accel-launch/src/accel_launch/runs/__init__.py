"""`accel plot`: the metrics of finished runs read from their tracker files, drawn side by side."""
