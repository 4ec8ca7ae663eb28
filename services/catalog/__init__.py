"""Catalogs: items mapped to semantic IDs, from an input file to the trie a decoder constrains on.

``types.py`` holds what every part shares (``CatalogEntry``, ``CatalogError``); ``sid_layout.py``
maps SID codes to token ids; ``formats/`` parses and validates every input format, and its
``load_trie`` is the one path from a catalog file to a trie (catalog service uploads and the
decoder's ``--catalog`` file alike); ``trie*.py`` build, query and serialise the trie, whose
item ids are one ``string_table.py`` (a UTF-8 buffer + offsets, not Python strings);
``store/`` publishes versions to Redis and follows them; ``service/`` is the HTTP catalog
service and ``cli.py`` its commands; ``sids/`` derives SIDs from item embeddings;
``default_name.py`` is the catalog name requests mean when they name none. See docs/catalog.md.
"""
