! Collectives from Fortran (use mpi), for the interposers: an allreduce of
! integers and of double precision values, in place and not, and a broadcast.
! Prints "mpi_fortran: ok" on rank 0 and exits 0 when every value is right.
program mpi_fortran
    use mpi
    implicit none
    integer, parameter :: n = 1001
    integer :: ierr, rank, nranks, i, bad, allbad
    integer :: ivals(n), isum(n)
    double precision :: dvals(n)
    real :: rvals(n)

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
    bad = 0
    do i = 1, n
        ivals(i) = rank + i
        dvals(i) = dble(rank * i)
        rvals(i) = 0.0
    end do
    call MPI_Allreduce(ivals, isum, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Allreduce(MPI_IN_PLACE, dvals, n, MPI_DOUBLE_PRECISION, MPI_MAX, &
                       MPI_COMM_WORLD, ierr)
    if (rank == 0) then
        do i = 1, n
            rvals(i) = real(i)
        end do
    end if
    call MPI_Bcast(rvals, n, MPI_REAL, 0, MPI_COMM_WORLD, ierr)
    do i = 1, n
        if (isum(i) /= nranks * i + nranks * (nranks - 1) / 2) bad = bad + 1
        if (dvals(i) /= dble((nranks - 1) * i)) bad = bad + 1
        if (rvals(i) /= real(i)) bad = bad + 1
    end do
    call MPI_Allreduce(bad, allbad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0) then
        if (allbad == 0) then
            print '(a)', 'mpi_fortran: ok'
        else
            print '(a, i0, a)', 'mpi_fortran: ', allbad, ' wrong values'
        end if
    end if
    call MPI_Finalize(ierr)
    if (allbad /= 0) stop 1
end program mpi_fortran
