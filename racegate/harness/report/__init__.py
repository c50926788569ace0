"""Stage 4, the report: the matrix of judged records as Markdown, HTML, PNG and gate JSON."""
