"""The research pack: invented works, authors, institutions, authorships and citations, shaped
like OpenAlex (see ../../DOMAINS, "Research analytics")."""
