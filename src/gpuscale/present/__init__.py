"""The report page, its charts and the generated docs: tables in, HTML, Vega-Lite and Markdown out (never torch)."""
