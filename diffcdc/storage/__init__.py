"""The byte store under state and every sink (:mod:`diffcdc.storage.base`), one backend per
URL scheme (:mod:`diffcdc.storage.registry`)."""
