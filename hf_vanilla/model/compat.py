"""What differs between the transformers versions the model runs on: the name of the key/value cache.

transformers 5.24 renamed the cache that `generate` hands to forward, and the masks and outputs take, from
`past_key_values` to `cache`. The model works with the name of the installed version.
"""

import functools
import inspect
from collections.abc import Callable

from transformers.cache_utils import Cache
from transformers.masking_utils import create_causal_mask
from transformers.utils.deprecation import deprecate_kwarg

CACHE_NAME = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def takes_cache_by_either_name(forward: Callable) -> Callable:
    """A forward that takes `cache`, also under the older name `past_key_values`.

    Where `cache` is transformers' name, the older one warns as transformers' own models do (until 5.40);
    where `past_key_values` still is (before 5.24), it is what `generate` passes, so it is taken silently.
    """
    if CACHE_NAME == "cache":
        return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)

    @functools.wraps(forward)
    def forward_taking_past_key_values(*args, past_key_values: Cache | None = None, **kwargs):
        if past_key_values is not None:
            kwargs["cache"] = past_key_values
        return forward(*args, **kwargs)

    return forward_taking_past_key_values
