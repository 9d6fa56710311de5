"""The producer HTTP API: POST /v1/records and GET /v1/health behind API Gateway (REST)."""
