Ba_scaleJ
×#=