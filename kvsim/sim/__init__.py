"""The behaviour: engines as SimPy processes, routing, load policies, the simulation."""
