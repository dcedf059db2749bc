#include "mrcn.h"

const char *mrcn_strerror(int status)
{
    switch (status) {
    case MRCN_OK: return "ok";
    case MRCN_EPROTO: return "not a valid MRC packet";
    case MRCN_ECRC: return "CRC mismatch";
    case MRCN_EINVAL: return "argument out of range";
    case MRCN_ENOSPC: return "output buffer too small";
    case MRCN_ENOMEM: return "out of memory";
    case MRCN_ESTATE: return "state does not accept the call";
    default: return "unknown status";
    }
}
