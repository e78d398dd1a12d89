"""Tools that run many simulations: sweeps over scenario fields, SLO capacity search."""
