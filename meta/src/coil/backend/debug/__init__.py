"""Debugging artefacts: the debug dir, artefact logs, text dumps, repro scripts and run-time self-checks."""
