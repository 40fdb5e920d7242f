"""Reports people read without Grafana: a self-contained HTML file and the PR comment."""
