//! Placeholder: helper-49 writes the probes here.
