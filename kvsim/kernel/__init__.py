"""Event machinery with no model in it: bandwidth-shared links (the fabric)."""
