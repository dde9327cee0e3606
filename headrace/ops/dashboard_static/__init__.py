"""Static files of the dashboard (served from a fixed list)."""
