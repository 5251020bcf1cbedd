"""The tune report (RUN/report.html): `data` gathers a ReportData from the run's records,
`figures` and `capacity` draw Plotly figure dicts from it, `render` lays the page out, and `page`
is the self-contained page shell every report (tune, plan, screened tune) shares."""
