"""`keras-tfm cache info|clear`: the cache of compiled code and converted
models (`keras_tfm.lite.user_cache`)."""

import os

HELP = "show or clear the cache of compiled code and converted models"


def add_arguments(p):
    p.add_argument("action", choices=["info", "clear"])


def run(args):
    from keras_tfm.lite import user_cache

    folder = user_cache.cache_directory()
    if folder is None:
        print(f"caching is off ({user_cache.CACHE_ENV}={user_cache.OFF})")
    elif args.action == "clear":
        print(f"removed {folder} ({user_cache.clear() / 1e6:.1f} MB)")
        return
    else:
        chosen = os.environ.get(user_cache.CACHE_ENV)
        where = f"set by {user_cache.CACHE_ENV}" if chosen else "the default"
        print(f"cache folder: {folder} ({where})")
    for name, (entries, size) in user_cache.info().items():
        print(f"{name}: {entries} entries, {size / 1e6:.1f} MB")
