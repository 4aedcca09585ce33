"""Reporting: rich tables, LaTeX, Markdown and plots."""
