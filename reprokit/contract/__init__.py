"""What both sides and every stage share: the trainers' contract and the run directory's and
session's files (their names, readers and writers), errors, the console, where the kit's folders are."""
