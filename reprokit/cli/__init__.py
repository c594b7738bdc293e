"""The command line: the invoke tasks (`inv`, the installed `reprokit` program), their flags and
the site settings. Above every stage: it only calls into them."""
