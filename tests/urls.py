"""URL normalisation with the defaults file's ``[url]`` section, for tests.

Library code has no such shortcut: it takes the ``[url]`` section it is given,
so ``--conf`` and ``--set`` reach it.
"""

from crawl_udfs import config
from crawl_udfs.url_normalize import UrlNormalizer

normalize = UrlNormalizer(config.defaults().url).normalize
