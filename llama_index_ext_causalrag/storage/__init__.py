"""Where indexes keep what they hold. The generic code works with any LlamaIndex store through
its API; each store that does more has a driver in a folder of its own, registered here (one
line a store): :mod:`.drivers` says what a driver offers."""

from llama_index_ext_causalrag.storage.drivers import register
from llama_index_ext_causalrag.storage.milvus.driver import MILVUS_DRIVER
from llama_index_ext_causalrag.storage.pg.driver import PG

register(MILVUS_DRIVER)
register(PG)
