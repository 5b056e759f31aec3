"""The credit pack: invented issuers, ratings, ownership and countries (see ../../DOMAINS)."""
