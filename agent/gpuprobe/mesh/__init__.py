"""The bandwidth mesh: which pairs of nodes test when, and what their figures mean."""
