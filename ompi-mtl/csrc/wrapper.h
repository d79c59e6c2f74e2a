/* What bindgen sees: the MTL interface of Open MPI 4.1 and the shim. */
#include "ompi_config.h"
#include "mpi.h"
#include "ompi/constants.h"
#include "ompi/mca/mtl/mtl.h"
#include "ompi/mca/pml/pml_constants.h"
#include "shim.h"
