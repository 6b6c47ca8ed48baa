-- The W3C trace context a job continues (docs/operations.md, "Tracing"):
-- the submit request's traceparent, or the submitter's own span when
-- tracing is on. NULL: the job has no trace. Written once, by the insert;
-- the claim returns it for the delivery. A nullable column without a
-- default: adding it rewrites nothing.
ALTER TABLE jobs ADD COLUMN trace_parent text;
