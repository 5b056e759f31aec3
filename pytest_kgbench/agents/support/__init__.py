"""What the model agents share: the response cache, batches, fault classes and the MCP tool
server the Claude CLI talks to.
"""
