// The donor of a shared precompiled header (cmake/PipeForgePch.cmake).
