# CMake package config and CPack: see deploy (issue 9).
