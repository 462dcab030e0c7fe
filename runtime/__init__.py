"""The anyio runtime that drives the charts, and the Runtime facade."""
