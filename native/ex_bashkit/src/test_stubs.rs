//! Stand-ins for the BEAM's `enif_*` functions, in the unit-test binary only.
//!
//! The NIF library links with these symbols undefined: the BEAM provides them
//! when it loads the library. The `cargo test` executable has no BEAM, and
//! the dynamic loader refuses to start an executable with undefined function
//! symbols, even ones no test calls. Every function of NIF API 2.16 (the
//! version rustler is built for, see Cargo.toml) is defined here to abort if
//! ever called: a unit test must not touch Erlang terms.

macro_rules! stubs {
    ($($name:ident)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name() {
                eprintln!(concat!(stringify!($name), " called outside the BEAM"));
                std::process::abort();
            }
        )*
    };
}

stubs! {
        enif_alloc enif_alloc_binary enif_alloc_env enif_alloc_resource enif_binary_to_term
        enif_clear_env enif_compare enif_compare_monitors enif_consume_timeslice
        enif_convert_time_unit enif_cpu_time enif_demonitor_process enif_dlopen enif_dlsym
        enif_dynamic_resource_call enif_free enif_free_env enif_free_iovec enif_get_atom
        enif_get_atom_length enif_get_double enif_get_int enif_get_int64 enif_get_list_cell
        enif_get_list_length enif_get_local_pid enif_get_local_port enif_get_long
        enif_get_map_size enif_get_map_value enif_get_resource enif_get_string enif_get_tuple
        enif_get_uint enif_get_uint64 enif_get_ulong enif_getenv enif_has_pending_exception
        enif_hash enif_init_resource_type enif_inspect_binary enif_inspect_iolist_as_binary
        enif_inspect_iovec enif_ioq_create enif_ioq_deq enif_ioq_destroy enif_ioq_enq_binary
        enif_ioq_enqv enif_ioq_peek enif_ioq_peek_head enif_ioq_size enif_is_atom
        enif_is_binary enif_is_current_process_alive enif_is_empty_list enif_is_exception
        enif_is_fun enif_is_identical enif_is_list enif_is_map enif_is_number enif_is_pid
        enif_is_pid_undefined enif_is_port enif_is_port_alive enif_is_process_alive enif_is_ref
        enif_is_tuple enif_keep_resource enif_make_atom enif_make_atom_len enif_make_badarg
        enif_make_binary enif_make_copy enif_make_double enif_make_existing_atom
        enif_make_existing_atom_len enif_make_int enif_make_int64 enif_make_list_cell
        enif_make_list_from_array enif_make_long enif_make_map_from_arrays enif_make_map_put
        enif_make_map_remove enif_make_map_update enif_make_monitor_term enif_make_new_binary
        enif_make_new_map enif_make_ref enif_make_resource enif_make_resource_binary
        enif_make_reverse_list enif_make_string enif_make_string_len enif_make_sub_binary
        enif_make_tuple_from_array enif_make_uint enif_make_uint64 enif_make_ulong
        enif_make_unique_integer enif_map_iterator_create enif_map_iterator_destroy
        enif_map_iterator_get_pair enif_map_iterator_is_head enif_map_iterator_is_tail
        enif_map_iterator_next enif_map_iterator_prev enif_monitor_process enif_monotonic_time
        enif_now_time enif_open_resource_type enif_open_resource_type_x enif_port_command
        enif_priv_data enif_raise_exception enif_realloc enif_realloc_binary
        enif_release_binary enif_release_resource enif_schedule_nif enif_select enif_select_x
        enif_self enif_send enif_set_pid_undefined enif_sizeof_resource enif_system_info
        enif_term_to_binary enif_term_type enif_thread_type enif_time_offset enif_whereis_pid
        enif_whereis_port
}
