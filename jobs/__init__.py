"""One module per crawl verb: Spark + Delta I/O with a thin main()."""
