"""What GLiNER2.5-Decide and Laya share: typed questions and their checks, the decision request shapes,
and GLiNER2's word splitter."""
