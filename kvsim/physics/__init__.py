"""Pure functions and small value objects for the maths: timing tables, the cost model."""
