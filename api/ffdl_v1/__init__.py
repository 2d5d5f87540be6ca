"""FfDL's REST API (`/v1/models`) as a translation over dlaas's own services.

`mapping` holds the pure translations (states, jobs, errors, the gateway's identity header,
log and metric records), `schemas` FfDL's response shapes with FfDL's field names, `access`
who a /v1 request acts as and which /v2 rule each /v1 operation follows, `errors` the
middleware that answers every /v1 error in FfDL's `Error` shape.
"""
