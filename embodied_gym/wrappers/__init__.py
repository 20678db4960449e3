"""Gymnasium wrappers (the VisAligner observation wrapper and LeRobot format adapters land here)."""
