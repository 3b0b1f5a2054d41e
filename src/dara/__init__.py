"""dara: Density-Aware Reward Aggregation for multi-reward RL.

Kept free of heavy imports so that every environment (CPU, BFCL scoring, verl) can import it.
"""

__version__ = "0.1.0"
